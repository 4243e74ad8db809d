//! Parameters of the firmware update capability.

use serde::{Deserialize, Serialize};

/// A firmware update, by one of two transfers:
///
/// - **SimpleUpdate** (`image_uri`): Redfish `UpdateService.SimpleUpdate`;
///   the BMC fetches the image itself from `image_uri`: the worker never
///   does. A URI with user info or a query string is a secret like a media
///   URL: sealed before it is stored, hidden in logs, scrubbed from messages.
/// - **multipart HTTP push** (`image_file`): the worker sends the image to
///   the BMC's `UpdateService.MultipartHttpPushUri`. The image is a plain
///   file name in the operator's `--firmware-image-dir` on the worker: a
///   producer never names a URL or a path the worker would read.
///
/// Exactly one of `image_uri` and `image_file`.
#[serde_with::skip_serializing_none]
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FirmwareUpdate {
    /// Where the BMC fetches the image (`ImageURI`): SimpleUpdate.
    pub image_uri: Option<String>,
    /// The image to push (multipart HTTP push): a file name in the worker's
    /// `--firmware-image-dir` ([`validate_image_file`]).
    pub image_file: Option<String>,
    /// The SHA-256 of `image_file` (64 hex digits): the worker checks it
    /// before anything is sent. Only with `image_file`.
    pub sha256: Option<String>,
    /// The firmware inventory items to update (`Targets`: resource paths on
    /// the BMC, `/redfish/v1/...`); none: the BMC decides from the image.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<String>,
    /// How the BMC fetches the image (`TransferProtocol`); none: the
    /// image URI's scheme says. Only with `image_uri`.
    pub transfer_protocol: Option<TransferProtocol>,
    /// When the BMC applies the update (`@Redfish.OperationApplyTime`);
    /// none: the BMC's default.
    pub apply_time: Option<UpdateApplyTime>,
}

/// Where a [`FirmwareUpdate`]'s image comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ImageSource<'a> {
    /// The BMC fetches it (SimpleUpdate).
    Uri(&'a str),
    /// The worker pushes this file of its image directory (multipart HTTP
    /// push), checked against `sha256` when given.
    File { name: &'a str, sha256: Option<&'a str> },
}

/// Most `targets` one update may name.
pub const MAX_FIRMWARE_TARGETS: usize = 16;
/// Longest `image_uri`.
pub const MAX_IMAGE_URI: usize = 2048;
/// Longest `image_file`, in bytes.
pub const MAX_IMAGE_FILE: usize = 255;

/// Checks a firmware image file name (`firmware_update.image_file`): one
/// path component of 1 to [`MAX_IMAGE_FILE`] characters from `A-Z a-z 0-9
/// . _ - + = @ , ~`, not starting with `.` (no `..`, no hidden files): never
/// a path, a separator (`/`, `\`), NUL, a control character or a space.
pub fn validate_image_file(name: &str) -> Result<(), String> {
    let allowed = |c: char| c.is_ascii_alphanumeric() || "._-+=@,~".contains(c);
    if name.is_empty() || name.len() > MAX_IMAGE_FILE || name.starts_with('.') || !name.chars().all(allowed) {
        return Err(format!(
            "firmware_update.image_file {:?}: a plain file name of the worker's firmware image directory \
             (1 to {MAX_IMAGE_FILE} characters of A-Z a-z 0-9 . _ - + = @ , ~, not starting with `.`; no path)",
            name.chars().take(64).collect::<String>()
        ));
    }
    Ok(())
}

impl FirmwareUpdate {
    /// The image's source (after [`FirmwareUpdate::validate`]: exactly one).
    pub fn source(&self) -> ImageSource<'_> {
        match (&self.image_uri, &self.image_file) {
            (_, Some(name)) => ImageSource::File { name, sha256: self.sha256.as_deref() },
            (Some(uri), None) => ImageSource::Uri(uri),
            (None, None) => ImageSource::Uri(""),
        }
    }

    /// Checks what the gateway accepts (and the worker before sending).
    pub fn validate(&self) -> Result<(), String> {
        match (&self.image_uri, &self.image_file) {
            (Some(_), Some(_)) => return Err(
                "firmware_update: image_uri (the BMC fetches) and image_file (the worker pushes) exclude each other"
                    .into(),
            ),
            (None, None) => {
                return Err(
                    "firmware_update: needs image_uri (the BMC fetches the image) or image_file (the worker pushes it)"
                        .into(),
                )
            }
            (Some(uri), None) => {
                if self.sha256.is_some() {
                    return Err(
                        "firmware_update.sha256: only with image_file (the worker cannot check what the BMC fetches)"
                            .into(),
                    );
                }
                validate_image_uri(uri)?;
            }
            (None, Some(name)) => {
                validate_image_file(name)?;
                if self.transfer_protocol.is_some() {
                    return Err(
                        "firmware_update.transfer_protocol: only with image_uri (a pushed image is sent by the worker)"
                            .into(),
                    );
                }
                if let Some(h) = &self.sha256 {
                    if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err("firmware_update.sha256: 64 hexadecimal digits".into());
                    }
                }
            }
        }
        if self.targets.len() > MAX_FIRMWARE_TARGETS {
            return Err(format!("firmware_update.targets: at most {MAX_FIRMWARE_TARGETS}"));
        }
        for t in &self.targets {
            match crate::raw_policy::canonical_redfish_path(t) {
                Ok(c) if c == *t && !t.contains('?') && t.len() <= 512 => {}
                _ => {
                    let shown = crate::raw_policy::without_query(t);
                    return Err(format!("firmware_update.targets: {shown:?} is not a plain resource path under /redfish/v1 (canonical, no query, at most 512 bytes)"));
                }
            }
        }
        Ok(())
    }
}

fn validate_image_uri(uri: &str) -> Result<(), String> {
    if uri.len() > MAX_IMAGE_URI || uri.chars().any(|c| c.is_control() || c.is_whitespace()) {
        return Err(format!(
            "firmware_update.image_uri: at most {MAX_IMAGE_URI} characters, no spaces or control characters"
        ));
    }
    let u = url::Url::parse(uri).map_err(|e| format!("firmware_update.image_uri is not a URL: {e}"))?;
    if TransferProtocol::from_scheme(u.scheme()).is_none() {
        return Err(format!("firmware_update.image_uri: scheme `{}` is not one a BMC fetches from (http, https, ftp, sftp, scp, tftp, nfs, cifs)", u.scheme()));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err("firmware_update.image_uri names no host".into());
    }
    Ok(())
}

/// How a BMC fetches an update image (Redfish `TransferProtocolType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum TransferProtocol {
    Http,
    Https,
    Ftp,
    Sftp,
    Scp,
    Tftp,
    Nfs,
    Cifs,
}

impl TransferProtocol {
    /// The Redfish name.
    pub fn redfish(self) -> &'static str {
        match self {
            TransferProtocol::Http => "HTTP",
            TransferProtocol::Https => "HTTPS",
            TransferProtocol::Ftp => "FTP",
            TransferProtocol::Sftp => "SFTP",
            TransferProtocol::Scp => "SCP",
            TransferProtocol::Tftp => "TFTP",
            TransferProtocol::Nfs => "NFS",
            TransferProtocol::Cifs => "CIFS",
        }
    }

    /// The protocol a URI scheme names.
    pub fn from_scheme(scheme: &str) -> Option<TransferProtocol> {
        Some(match scheme.to_ascii_lowercase().as_str() {
            "http" => TransferProtocol::Http,
            "https" => TransferProtocol::Https,
            "ftp" => TransferProtocol::Ftp,
            "sftp" => TransferProtocol::Sftp,
            "scp" => TransferProtocol::Scp,
            "tftp" => TransferProtocol::Tftp,
            "nfs" => TransferProtocol::Nfs,
            "cifs" | "smb" => TransferProtocol::Cifs,
            _ => return None,
        })
    }
}

/// When a BMC applies an update (Redfish `OperationApplyTime`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum UpdateApplyTime {
    Immediate,
    OnReset,
    AtMaintenanceWindowStart,
    InMaintenanceWindowOnReset,
    OnStartUpdateRequest,
}

impl UpdateApplyTime {
    /// The Redfish name.
    pub fn redfish(self) -> &'static str {
        match self {
            UpdateApplyTime::Immediate => "Immediate",
            UpdateApplyTime::OnReset => "OnReset",
            UpdateApplyTime::AtMaintenanceWindowStart => "AtMaintenanceWindowStart",
            UpdateApplyTime::InMaintenanceWindowOnReset => "InMaintenanceWindowOnReset",
            UpdateApplyTime::OnStartUpdateRequest => "OnStartUpdateRequest",
        }
    }
}
