//! Parameters of the boot device capability.

use serde::{Deserialize, Serialize};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum BootDevice {
    Pxe,
    Disk,
    Cdrom,
    Bios,
    Safe,
    /// UEFI HTTP boot (Redfish `UefiHttp`, where the BMC allows it).
    Http,
    /// No override (read back only).
    #[cfg_attr(feature = "clap", value(skip))]
    None,
    /// An override bmcfleet has no name for (read back only: e.g. Redfish
    /// `Usb`, `UefiTarget`, `UefiShell`, an IPMI remote-media selector).
    #[cfg_attr(feature = "clap", value(skip))]
    Other,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootDeviceRequest {
    pub device: BootDevice,
    /// Applies to every boot rather than the next one only.
    #[serde(default)]
    pub persistent: bool,
    /// UEFI boot rather than legacy BIOS.
    #[serde(default)]
    pub efi: bool,
}
