//! [`IpmiSession`]: the typed command layer and the capability traits,
//! generic over a [`Transport`].

use crate::cmd::{self, Command, PasswordOp, UserAccess, CURRENT_CHANNEL};
use crate::error::{completion_code_error, CommandId};
use crate::fru;
use crate::transport::{Request, Response, Retry, Transport};
use async_trait::async_trait;
use bmcfleet_provider::{
    BmcReset, BmcSession, BootControl, Ctx, Inventory, NetworkSource, Power, ProviderError, Raw, Result, Users,
};
use bmcfleet_schema::{
    BmcResetKind, BootDeviceRequest, ErrorCode, Inventory as InventoryData, NetworkSourceOp, PowerOp, PowerState,
    RawRequest, RawResponse, StaticIpv4, UserInfo, UserRole, UserSpec, UserUpdate,
};
use std::net::Ipv4Addr;
use tracing::Instrument;

/// Largest raw IPMI request data (one IPMI message; matches the schema's
/// default `max_raw_ipmi_bytes`).
pub const MAX_RAW_DATA: usize = 255;

/// An IPMI conversation with one BMC over any [`Transport`].
pub struct IpmiSession<T> {
    transport: T,
    /// The BMC as named in logs and spans (its address).
    bmc: String,
    /// The LAN channel used for user access and LAN configuration:
    /// configured, or discovered with Get Channel Info on first use.
    channel: Option<u8>,
}

fn invalid(message: impl Into<String>) -> ProviderError {
    ProviderError::new(ErrorCode::InvalidField, message)
}

fn protocol(command: CommandId, what: impl std::fmt::Display) -> ProviderError {
    ProviderError::new(ErrorCode::ProtocolError, format!("{command}: {what}"))
}

impl<T: Transport> IpmiSession<T> {
    pub fn new(transport: T, bmc: impl Into<String>) -> Self {
        IpmiSession { transport, bmc: bmc.into(), channel: None }
    }

    /// Uses `channel` for user access and LAN configuration instead of the
    /// channel the session arrived on.
    pub fn with_channel(mut self, channel: u8) -> Self {
        self.channel = Some(channel & 0x0F);
        self
    }

    pub fn transport(&self) -> &T {
        &self.transport
    }

    pub fn transport_mut(&mut self) -> &mut T {
        &mut self.transport
    }

    /// Sends one command and returns the BMC's completion code and data,
    /// whatever the code. One `ipmi_call` span per call.
    pub async fn send(&mut self, ctx: &Ctx, command: &Command, data: Vec<u8>) -> Result<Response> {
        ctx.remaining()?;
        let id = command.id;
        let span = tracing::debug_span!(
            "ipmi_call",
            bmc = %self.bmc,
            protocol = "ipmi",
            netfn = id.netfn,
            cmd = id.cmd,
            command = id.name,
            outcome = tracing::field::Empty,
        );
        let request = Request { netfn: id.netfn, cmd: id.cmd, data, retry: command.retry };
        let sent_before = ctx.note_sending();
        let result = self.transport.call(ctx.deadline, &request).instrument(span.clone()).await;
        match &result {
            Ok(r) if r.cc == 0 => span.record("outcome", "ok"),
            Ok(r) => span.record("outcome", format!("cc 0x{:02X}", r.cc)),
            Err(e) => span.record("outcome", format!("{:?}", e.kind)),
        };
        result.map_err(|e| ctx.settle(sent_before, ProviderError::from(e)))
    }

    /// Sends one command and requires completion code 0; returns the data.
    pub async fn exec(&mut self, ctx: &Ctx, command: &Command, data: Vec<u8>) -> Result<Vec<u8>> {
        let response = self.send(ctx, command, data).await?;
        if response.cc != 0 {
            return Err(completion_code_error(command.id, response.cc, command.specific));
        }
        Ok(response.data)
    }

    /// The channel for user and LAN commands.
    async fn channel(&mut self, ctx: &Ctx) -> Result<u8> {
        if let Some(c) = self.channel {
            return Ok(c);
        }
        let data = self.exec(ctx, &cmd::GET_CHANNEL_INFO, vec![CURRENT_CHANNEL]).await?;
        let channel = data.first().ok_or_else(|| protocol(cmd::GET_CHANNEL_INFO.id, "empty response"))? & 0x0F;
        self.channel = Some(channel);
        Ok(channel)
    }

    // ------------------------------------------------------------ users

    async fn user_access(&mut self, ctx: &Ctx, channel: u8, id: u8) -> Result<UserAccess> {
        let data = self.exec(ctx, &cmd::GET_USER_ACCESS, cmd::encode_get_user_access(channel, id)).await?;
        cmd::decode_user_access(&data).ok_or_else(|| protocol(cmd::GET_USER_ACCESS.id, "response too short"))
    }

    /// Every slot's name (`None` where the BMC refuses to name the slot),
    /// from id 2 (id 1 is the fixed anonymous user) to the BMC's maximum.
    async fn user_names(&mut self, ctx: &Ctx, channel: u8) -> Result<Vec<(u8, Option<String>)>> {
        let max = self.user_access(ctx, channel, 1).await?.max_users;
        let mut names = Vec::with_capacity(usize::from(max));
        for id in 2..=max {
            match self.exec(ctx, &cmd::GET_USER_NAME, vec![id]).await {
                Ok(data) => names.push((id, Some(cmd::decode_user_name(&data)))),
                Err(e) if matches!(e.code, ErrorCode::InvalidField | ErrorCode::TargetNotFound) => {
                    names.push((id, None))
                }
                Err(e) => return Err(e),
            }
        }
        Ok(names)
    }

    async fn find_user(&mut self, ctx: &Ctx, channel: u8, name: &str) -> Result<Option<u8>> {
        let names = self.user_names(ctx, channel).await?;
        Ok(names.into_iter().find(|(_, n)| n.as_deref() == Some(name)).map(|(id, _)| id))
    }

    async fn user_info(&mut self, ctx: &Ctx, channel: u8, id: u8, name: String) -> Result<UserInfo> {
        let access = self.user_access(ctx, channel, id).await?;
        Ok(UserInfo {
            id: id.to_string(),
            name,
            role: cmd::privilege_role(access.privilege),
            enabled: access.is_enabled(),
        })
    }

    async fn set_enabled(&mut self, ctx: &Ctx, channel: u8, id: u8, privilege: u8, enabled: bool) -> Result<()> {
        self.exec(ctx, &cmd::SET_USER_ACCESS, cmd::encode_set_user_access(channel, id, privilege, enabled))
            .await?;
        let op = if enabled { PasswordOp::Enable } else { PasswordOp::Disable };
        self.exec(ctx, &cmd::SET_USER_PASSWORD, cmd::encode_set_user_password(id, op, None)).await?;
        Ok(())
    }

    async fn create_in_slot(&mut self, ctx: &Ctx, channel: u8, id: u8, spec: &UserSpec) -> Result<()> {
        self.exec(ctx, &cmd::SET_USER_NAME, cmd::encode_set_user_name(id, &spec.name)).await?;
        self.exec(
            ctx,
            &cmd::SET_USER_PASSWORD,
            cmd::encode_set_user_password(id, PasswordOp::Set, Some(spec.password.expose())),
        )
        .await?;
        self.set_enabled(ctx, channel, id, cmd::role_privilege(spec.role), spec.enabled).await
    }

    async fn clear_slot(&mut self, ctx: &Ctx, channel: u8, id: u8) -> Result<()> {
        self.exec(ctx, &cmd::SET_USER_PASSWORD, cmd::encode_set_user_password(id, PasswordOp::Disable, None))
            .await?;
        self.exec(
            ctx,
            &cmd::SET_USER_ACCESS,
            cmd::encode_set_user_access(channel, id, cmd::role_privilege(UserRole::NoAccess), false),
        )
        .await?;
        self.exec(ctx, &cmd::SET_USER_NAME, cmd::encode_set_user_name(id, "")).await?;
        Ok(())
    }

    // ------------------------------------------------------------ LAN

    async fn lan_param(&mut self, ctx: &Ctx, channel: u8, param: u8, len: usize) -> Result<Vec<u8>> {
        let data = self.exec(ctx, &cmd::GET_LAN_CONFIG, cmd::encode_get_lan_param(channel, param)).await?;
        cmd::lan_param_value(&data, len)
            .map(<[u8]>::to_vec)
            .map_err(|e| protocol(cmd::GET_LAN_CONFIG.id, format!("parameter {param}: {e}")))
    }

    async fn set_lan_param(&mut self, ctx: &Ctx, channel: u8, param: u8, value: &[u8]) -> Result<()> {
        self.exec(ctx, &cmd::SET_LAN_CONFIG, cmd::encode_set_lan_param(channel, param, value)).await?;
        Ok(())
    }

    /// Writes LAN parameters inside a set-in-progress bracket when the BMC
    /// supports parameter 0 (23.2): set in progress, the writes, commit
    /// write, set complete. On a BMC with rollback (ipmi_sim) "set complete"
    /// without "commit write" discards the writes, so a failure part-way
    /// leaves the old configuration in place.
    async fn set_lan_params(&mut self, ctx: &Ctx, channel: u8, params: &[(u8, Vec<u8>)]) -> Result<()> {
        let locked = match self.set_lan_param(ctx, channel, cmd::LAN_SET_IN_PROGRESS, &[0x01]).await {
            Ok(()) => true,
            Err(e) if matches!(e.code, ErrorCode::Unsupported | ErrorCode::InvalidField) => false,
            Err(e) => return Err(e),
        };
        let mut result = Ok(());
        for (param, value) in params {
            result = self.set_lan_param(ctx, channel, *param, value).await;
            if result.is_err() {
                break;
            }
        }
        if locked {
            if result.is_ok() {
                // Commit write is optional in the spec: a BMC without it
                // applies the values at "set complete".
                match self.set_lan_param(ctx, channel, cmd::LAN_SET_IN_PROGRESS, &[0x02]).await {
                    Err(e) if !matches!(e.code, ErrorCode::Unsupported | ErrorCode::InvalidField) => result = Err(e),
                    _ => {}
                }
            }
            // Set complete releases the lock whatever happened above.
            let complete = self.set_lan_param(ctx, channel, cmd::LAN_SET_IN_PROGRESS, &[0x00]).await;
            result = result.and(complete);
        }
        result
    }

    // ------------------------------------------------------------ FRU

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

    /// Board and product info of FRU device 0, as name/value pairs and the
    /// parsed areas. A BMC without FRU data yields nothing.
    async fn fru_info(
        &mut self,
        ctx: &Ctx,
        extra: &mut Vec<(String, String)>,
    ) -> Result<(Option<fru::BoardInfo>, Option<fru::ProductInfo>)> {
        let info = self.send(ctx, &cmd::GET_FRU_INFO, vec![0]).await?;
        if info.cc != 0 || info.data.len() < 3 {
            return Ok((None, None));
        }
        let size = usize::from(u16::from_le_bytes([info.data[0], info.data[1]]));
        let words = info.data[2] & 0x01 != 0;
        let header = match fru::parse_header(&self.read_fru(ctx, 0, 8.min(size), words).await?) {
            Ok(h) => h,
            Err(e) => {
                extra.push(("fru_error".into(), e));
                return Ok((None, None));
            }
        };
        let mut board = None;
        let mut product = None;
        for (offset, is_board) in [(header.board, true), (header.product, false)] {
            let Some(offset) = offset.filter(|o| o + 2 <= size) else { continue };
            let len = match fru::area_len(&self.read_fru(ctx, offset, 2, words).await?) {
                Ok(len) if offset + len <= size => len,
                Ok(_) => {
                    extra.push(("fru_error".into(), "FRU area runs past the FRU size".into()));
                    continue;
                }
                Err(e) => {
                    extra.push(("fru_error".into(), e));
                    continue;
                }
            };
            let area = self.read_fru(ctx, offset, len, words).await?;
            let parsed = if is_board {
                fru::parse_board(&area).map(|b| board = Some(b))
            } else {
                fru::parse_product(&area).map(|p| product = Some(p))
            };
            if let Err(e) = parsed {
                extra.push(("fru_error".into(), e));
            }
        }
        Ok((board, product))
    }
}

// ---------------------------------------------------------------- capabilities

#[async_trait]
impl<T: Transport> Power for IpmiSession<T> {
    /// Status: Get Chassis Status (chassis 0x01). Everything else: Chassis
    /// Control (chassis 0x02) with 0 off, 1 on, 2 cycle, 3 hard reset,
    /// 4 diagnostic interrupt (NMI), 5 soft off (ACPI).
    async fn power(&mut self, ctx: &Ctx, op: PowerOp) -> Result<Option<PowerState>> {
        match cmd::chassis_control_code(op) {
            None => {
                let data = self.exec(ctx, &cmd::GET_CHASSIS_STATUS, vec![]).await?;
                let status = cmd::decode_chassis_status(&data)
                    .ok_or_else(|| protocol(cmd::GET_CHASSIS_STATUS.id, "empty response"))?;
                Ok(Some(if status.power_on { PowerState::On } else { PowerState::Off }))
            }
            Some(code) => {
                self.exec(ctx, &cmd::CHASSIS_CONTROL, vec![code]).await?;
                Ok(None)
            }
        }
    }
}

#[async_trait]
impl<T: Transport> BootControl for IpmiSession<T> {
    /// Set System Boot Options (chassis 0x08), parameter 5 (boot flags).
    async fn set_boot_device(&mut self, ctx: &Ctx, req: &BootDeviceRequest) -> Result<()> {
        self.exec(ctx, &cmd::SET_BOOT_OPTIONS, cmd::encode_boot_flags(req)).await?;
        Ok(())
    }

    /// Get System Boot Options (chassis 0x09), parameter 5.
    async fn boot_device(&mut self, ctx: &Ctx) -> Result<BootDeviceRequest> {
        let data = self.exec(ctx, &cmd::GET_BOOT_OPTIONS, cmd::get_boot_flags_request()).await?;
        cmd::decode_boot_flags(&data)
    }
}

#[async_trait]
impl<T: Transport> Users for IpmiSession<T> {
    /// Get User Access (app 0x44) for the slot count, then Get User Name
    /// (app 0x46) and Get User Access for every named slot.
    async fn list_users(&mut self, ctx: &Ctx) -> Result<Vec<UserInfo>> {
        let channel = self.channel(ctx).await?;
        let mut users = Vec::new();
        for (id, name) in self.user_names(ctx, channel).await? {
            if let Some(name) = name.filter(|n| !n.is_empty()) {
                users.push(self.user_info(ctx, channel, id, name).await?);
            }
        }
        Ok(users)
    }

    /// Picks the first slot without a name, then Set User Name (app 0x45),
    /// Set User Password (app 0x47, set), Set User Access (app 0x43:
    /// privilege, IPMI messaging) and Set User Password (enable/disable).
    /// A failure part-way clears the slot again.
    async fn create_user(&mut self, ctx: &Ctx, spec: &UserSpec) -> Result<UserInfo> {
        cmd::validate_user_name(&spec.name).map_err(invalid)?;
        cmd::validate_password(spec.password.expose()).map_err(invalid)?;
        let channel = self.channel(ctx).await?;
        let names = self.user_names(ctx, channel).await?;
        if let Some((id, _)) = names.iter().find(|(_, n)| n.as_deref() == Some(spec.name.as_str())) {
            return Err(ProviderError::new(
                ErrorCode::Conflict,
                format!("a user named {:?} already exists in slot {id}", spec.name),
            ));
        }
        let id = names
            .iter()
            .find(|(_, n)| n.as_deref() == Some(""))
            .map(|(id, _)| *id)
            .ok_or_else(|| {
                ProviderError::new(ErrorCode::BmcError, format!("no free user slot (all {} slots are named)", names.len()))
            })?;
        if let Err(e) = self.create_in_slot(ctx, channel, id, spec).await {
            if let Err(cleanup) = self.clear_slot(ctx, channel, id).await {
                tracing::warn!(bmc = %self.bmc, slot = id, error = %cleanup, "Could not clear a half-created user slot.");
            }
            return Err(e);
        }
        self.user_info(ctx, channel, id, spec.name.clone()).await
    }

    /// Finds the user by name (TargetNotFound when missing: never creates),
    /// then changes only what the update names.
    async fn update_user(&mut self, ctx: &Ctx, update: &UserUpdate) -> Result<UserInfo> {
        if let Some(pw) = &update.password {
            cmd::validate_password(pw.expose()).map_err(invalid)?;
        }
        let channel = self.channel(ctx).await?;
        let id = self.find_user(ctx, channel, &update.name).await?.ok_or_else(|| {
            ProviderError::new(ErrorCode::TargetNotFound, format!("no user named {:?} on the BMC", update.name))
        })?;
        if let Some(pw) = &update.password {
            self.exec(ctx, &cmd::SET_USER_PASSWORD, cmd::encode_set_user_password(id, PasswordOp::Set, Some(pw.expose())))
                .await?;
        }
        if update.role.is_some() || update.enabled.is_some() {
            let current = self.user_access(ctx, channel, id).await?;
            let privilege = match update.role {
                Some(role) => cmd::role_privilege(role),
                None if cmd::privilege_role(current.privilege).is_some() => current.privilege,
                None => cmd::role_privilege(UserRole::NoAccess),
            };
            let enabled = update.enabled.unwrap_or_else(|| current.is_enabled());
            self.set_enabled(ctx, channel, id, privilege, enabled).await?;
        }
        self.user_info(ctx, channel, id, update.name.clone()).await
    }

    /// Disable (Set User Password, disable), privilege No Access with IPMI
    /// messaging off (Set User Access), and an empty name (Set User Name):
    /// the slot is free again.
    async fn delete_user(&mut self, ctx: &Ctx, name: &str) -> Result<()> {
        let channel = self.channel(ctx).await?;
        let id = self.find_user(ctx, channel, name).await?.ok_or_else(|| {
            ProviderError::new(ErrorCode::TargetNotFound, format!("no user named {name:?} on the BMC"))
        })?;
        self.clear_slot(ctx, channel, id).await
    }
}

#[async_trait]
impl<T: Transport> BmcReset for IpmiSession<T> {
    /// Cold Reset (app 0x02) or Warm Reset (app 0x03). The transport drops
    /// its session afterwards (the BMC forgets all sessions).
    async fn reset_bmc(&mut self, ctx: &Ctx, kind: BmcResetKind) -> Result<()> {
        let command = match kind {
            BmcResetKind::Cold => &cmd::COLD_RESET,
            BmcResetKind::Warm => &cmd::WARM_RESET,
        };
        self.exec(ctx, command, vec![]).await?;
        Ok(())
    }
}

#[async_trait]
impl<T: Transport> NetworkSource for IpmiSession<T> {
    /// Get LAN Configuration Parameters (transport 0x02): parameter 4 (IP
    /// address source); for a static source also 3 (address), 6 (netmask)
    /// and 12 (default gateway; 0.0.0.0 reads as none). Sources "BIOS or
    /// system software" and "other BMC protocol" read as DHCP (dynamic);
    /// "unspecified" reads as static.
    async fn network_source(&mut self, ctx: &Ctx) -> Result<NetworkSourceOp> {
        let channel = self.channel(ctx).await?;
        let source = self.lan_param(ctx, channel, cmd::LAN_IP_SOURCE, 1).await?[0];
        if cmd::ip_source_is_dynamic(source) {
            return Ok(NetworkSourceOp::Dhcp);
        }
        let address = cmd::ipv4(&self.lan_param(ctx, channel, cmd::LAN_IP_ADDRESS, 4).await?);
        let netmask = cmd::ipv4(&self.lan_param(ctx, channel, cmd::LAN_SUBNET_MASK, 4).await?);
        let gateway = cmd::ipv4(&self.lan_param(ctx, channel, cmd::LAN_DEFAULT_GATEWAY, 4).await?);
        Ok(NetworkSourceOp::Static(StaticIpv4 {
            address,
            netmask,
            gateway: (!gateway.is_unspecified()).then_some(gateway),
        }))
    }

    /// Set LAN Configuration Parameters (transport 0x01): parameter 4 = DHCP.
    async fn set_dhcp(&mut self, ctx: &Ctx) -> Result<()> {
        let channel = self.channel(ctx).await?;
        self.set_lan_params(ctx, channel, &[(cmd::LAN_IP_SOURCE, vec![cmd::IP_SOURCE_DHCP])]).await
    }

    /// Set LAN Configuration Parameters: parameter 4 = static, then 3, 6 and
    /// (when given) 12. A missing gateway leaves the BMC's unchanged.
    async fn set_static(&mut self, ctx: &Ctx, addr: &StaticIpv4) -> Result<()> {
        validate_static(addr)?;
        let channel = self.channel(ctx).await?;
        let mut params = vec![
            (cmd::LAN_IP_SOURCE, vec![cmd::IP_SOURCE_STATIC]),
            (cmd::LAN_IP_ADDRESS, addr.address.octets().to_vec()),
            (cmd::LAN_SUBNET_MASK, addr.netmask.octets().to_vec()),
        ];
        if let Some(gw) = addr.gateway {
            params.push((cmd::LAN_DEFAULT_GATEWAY, gw.octets().to_vec()));
        }
        self.set_lan_params(ctx, channel, &params).await
    }
}

fn validate_static(addr: &StaticIpv4) -> Result<()> {
    let mask = u32::from(addr.netmask);
    if mask == 0 || mask.leading_ones() + mask.trailing_zeros() != 32 {
        return Err(invalid(format!("netmask {} is not a contiguous prefix", addr.netmask)));
    }
    let bad = |ip: Ipv4Addr| ip.is_unspecified() || ip.is_broadcast() || ip.is_multicast();
    if bad(addr.address) {
        return Err(invalid(format!("{} is not a usable host address", addr.address)));
    }
    if let Some(gw) = addr.gateway {
        if bad(gw) {
            return Err(invalid(format!("{gw} is not a usable gateway address")));
        }
        if u32::from(gw) & mask != u32::from(addr.address) & mask {
            return Err(invalid(format!("gateway {gw} is outside {}/{}", addr.address, mask.leading_ones())));
        }
    }
    Ok(())
}

#[async_trait]
impl<T: Transport> Raw for IpmiSession<T> {
    /// Any request netfn (even, below 0x40) and command, data up to 255
    /// bytes; sent once (raw requests are not idempotent). The completion
    /// code is returned as `status`, never turned into an error.
    async fn raw(&mut self, ctx: &Ctx, req: &RawRequest) -> Result<RawResponse> {
        let raw = match req {
            RawRequest::Ipmi(raw) => raw,
            RawRequest::Redfish(_) => return Err(invalid("a Redfish raw request cannot be sent to an IPMI BMC")),
        };
        if raw.netfn >= 0x40 || raw.netfn % 2 != 0 {
            return Err(invalid(format!(
                "netfn 0x{:02X} is not a request network function (even, below 0x40)",
                raw.netfn
            )));
        }
        if raw.data.len() > MAX_RAW_DATA {
            return Err(invalid(format!("raw data is {} bytes; the limit is {MAX_RAW_DATA}", raw.data.len())));
        }
        let command = Command {
            id: CommandId { name: "raw", netfn: raw.netfn, cmd: raw.cmd },
            retry: Retry::Once,
            specific: &[],
        };
        let response = self.send(ctx, &command, raw.data.clone()).await?;
        Ok(RawResponse { status: u16::from(response.cc), data: response.data, body: None })
    }
}

#[async_trait]
impl<T: Transport> Inventory for IpmiSession<T> {
    /// Get Device ID (app 0x01), Get Chassis Status (chassis 0x01), and FRU
    /// device 0 via Get FRU Inventory Area Info (storage 0x10) and Read FRU
    /// Data (storage 0x11): board and product info areas. Chassis status and
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
            extra.push(("aux_firmware_revision".into(), aux.iter().map(|b| format!("{b:02x}")).collect()));
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

        let (board, product) = if device.fru_inventory_support {
            self.fru_info(ctx, &mut extra).await?
        } else {
            (None, None)
        };
        let board = board.unwrap_or_default();
        let product = product.unwrap_or_default();
        for (key, value) in [
            ("board_manufacturer", &board.manufacturer),
            ("board_product", &board.product),
            ("board_serial", &board.serial),
            ("board_part_number", &board.part_number),
            ("product_part_number", &product.part_number),
            ("product_version", &product.version),
            ("asset_tag", &product.asset_tag),
        ] {
            if let Some(v) = value {
                extra.push((key.into(), v.clone()));
            }
        }
        Ok(InventoryData {
            manufacturer: product.manufacturer.or(board.manufacturer),
            model: product.name.or(board.product),
            serial: product.serial.or(board.serial),
            firmware_version: cmd::firmware_revision(&data),
            power_state,
            extra,
        })
    }
}

#[async_trait]
impl<T: Transport + 'static> BmcSession for IpmiSession<T> {
    fn provider(&self) -> &'static str {
        "ipmi"
    }
    fn power(&mut self) -> Option<&mut dyn Power> {
        Some(self)
    }
    fn boot(&mut self) -> Option<&mut dyn BootControl> {
        Some(self)
    }
    fn users(&mut self) -> Option<&mut dyn Users> {
        Some(self)
    }
    fn bmc_reset(&mut self) -> Option<&mut dyn BmcReset> {
        Some(self)
    }
    fn network_source(&mut self) -> Option<&mut dyn NetworkSource> {
        Some(self)
    }
    fn raw(&mut self) -> Option<&mut dyn Raw> {
        Some(self)
    }
    fn inventory(&mut self) -> Option<&mut dyn Inventory> {
        Some(self)
    }
    fn is_healthy(&self) -> bool {
        self.transport.is_healthy()
    }
    async fn close(&mut self) {
        self.transport.close().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_address_validation() {
        let ok = StaticIpv4 {
            address: "192.0.2.10".parse().unwrap(),
            netmask: "255.255.255.0".parse().unwrap(),
            gateway: Some("192.0.2.1".parse().unwrap()),
        };
        assert!(validate_static(&ok).is_ok());
        let mut bad = ok.clone();
        bad.netmask = "255.0.255.0".parse().unwrap();
        assert_eq!(validate_static(&bad).unwrap_err().code, ErrorCode::InvalidField);
        let mut bad = ok.clone();
        bad.gateway = Some("198.51.100.1".parse().unwrap());
        assert!(validate_static(&bad).is_err());
        let mut bad = ok;
        bad.address = Ipv4Addr::UNSPECIFIED;
        assert!(validate_static(&bad).is_err());
    }
}
