//! Firmware images a worker pushes to BMCs (`firmware_update.image_file`,
//! multipart HTTP push): files of one directory the operator owns
//! (`--firmware-image-dir`), never a URL or a path a producer chose.
//!
//! What is checked, in order, before a byte leaves for a BMC:
//! - the name is one plain path component ([`bmcfleet_schema::validate_image_file`]);
//! - the file, followed through symbolic links, is inside the directory
//!   (an operator may link `bios-latest.bin` to `bios-2.1.bin`; a link to
//!   `/etc/shadow` is refused);
//! - it is opened without following a link (`O_NOFOLLOW`, on the resolved
//!   path) and without blocking (`O_NONBLOCK`: a FIFO cannot hang the
//!   worker), then `fstat`ed: a regular file, at most `max_bytes`;
//! - its SHA-256 is computed (and compared with the action's `sha256`),
//!   and the upload ([`ImageReader`]) hashes again while it reads: bytes
//!   that differ from what was checked, or a file that shrank, end the
//!   upload with an error before its last byte, so the BMC never receives
//!   a complete image that was not the checked one.
//!
//! Errors are `firmware_image_invalid` (not retryable, nothing sent). File
//! contents never reach a log or a message: only the name, sizes and hashes.

use crate::{hex, ProviderError, Result};
use bmcfleet_schema::ErrorCode;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// Default `--firmware-image-max-bytes`: 512 MiB.
pub const DEFAULT_MAX_IMAGE_BYTES: u64 = 512 * 1024 * 1024;
/// How much the upload reads at a time.
pub const CHUNK: usize = 256 * 1024;

fn invalid(msg: impl Into<String>) -> ProviderError {
    ProviderError::new(ErrorCode::FirmwareImageInvalid, msg).not_sent()
}

/// Why the firmware image directory is unusable ([`ImageDir::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirErrorKind {
    /// It cannot be resolved or read (the source is the I/O error).
    Unreadable,
    /// It is not a directory.
    NotADirectory,
}

pub type DirError = bmcfleet_schema::error::Error<DirErrorKind>;

/// The operator's firmware image directory (`--firmware-image-dir`).
#[derive(Clone, Debug)]
pub struct ImageDir {
    /// Canonical (every link resolved): what a resolved image path must be under.
    root: PathBuf,
    /// `--firmware-image-max-bytes`.
    max_bytes: u64,
}

impl ImageDir {
    /// The directory at `path`: it must exist and be a directory.
    pub fn new(path: &Path, max_bytes: u64) -> std::result::Result<ImageDir, DirError> {
        let unreadable = |e| DirError::with_source(DirErrorKind::Unreadable, path.display().to_string(), e);
        let root = std::fs::canonicalize(path).map_err(unreadable)?;
        let meta = std::fs::metadata(&root).map_err(unreadable)?;
        if !meta.is_dir() {
            return Err(DirError::new(DirErrorKind::NotADirectory, format!("{} is not a directory", path.display())));
        }
        Ok(ImageDir { root, max_bytes })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Open the image `name` and compute its SHA-256 (blocking file I/O on
    /// the blocking pool); with `expected` (hex), a different hash is an error.
    pub async fn open(&self, name: &str, expected: Option<&str>) -> Result<Image> {
        let dir = self.clone();
        let (name, expected) = (name.to_owned(), expected.map(str::to_ascii_lowercase));
        tokio::task::spawn_blocking(move || {
            let image = dir.open_blocking(&name)?;
            let sha256 = image.hash()?;
            if let Some(want) = expected {
                if want != sha256 {
                    return Err(invalid(format!(
                        "the firmware image {name} has SHA-256 {sha256}, not the {want} the action names; nothing was sent"
                    )));
                }
            }
            Ok(Image { sha256, ..image })
        })
        .await
        .map_err(|e| ProviderError::new(ErrorCode::Internal, format!("reading a firmware image: {e}")).not_sent())?
    }

    fn open_blocking(&self, name: &str) -> Result<Image> {
        bmcfleet_schema::validate_image_file(name).map_err(invalid)?;
        let path = self.root.join(name);
        let resolved = match std::fs::canonicalize(&path) {
            Ok(p) => p,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(invalid(format!(
                    "no firmware image {name} in the worker's image directory (--firmware-image-dir); nothing was sent"
                )))
            }
            Err(e) => {
                return Err(invalid(format!("the firmware image {name} cannot be resolved: {e}; nothing was sent")))
            }
        };
        if !resolved.starts_with(&self.root) {
            return Err(invalid(format!(
                "the firmware image {name} is a symbolic link leading out of the worker's image directory; refused, nothing was sent"
            )));
        }
        let file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&resolved)
            .map_err(|e| invalid(format!("the firmware image {name} cannot be opened: {e}; nothing was sent")))?;
        let meta = file
            .metadata()
            .map_err(|e| invalid(format!("the firmware image {name} cannot be read: {e}; nothing was sent")))?;
        if !meta.is_file() {
            return Err(invalid(format!("the firmware image {name} is not a regular file; nothing was sent")));
        }
        if meta.len() > self.max_bytes {
            return Err(invalid(format!(
                "the firmware image {name} has {} bytes, more than the worker sends (--firmware-image-max-bytes {}); nothing was sent",
                meta.len(),
                self.max_bytes
            )));
        }
        if meta.len() == 0 {
            return Err(invalid(format!("the firmware image {name} is empty; nothing was sent")));
        }
        tracing::debug!(image = name, bytes = meta.len(), inode = meta.ino(), "Firmware image opened.");
        Ok(Image { name: name.to_owned(), file: std::sync::Arc::new(file), len: meta.len(), sha256: String::new() })
    }
}

/// An opened, checked image: its size and SHA-256 as they were when opened.
#[derive(Clone, Debug)]
pub struct Image {
    name: String,
    /// Read with positioned reads only (no shared offset between readers).
    file: std::sync::Arc<File>,
    len: u64,
    /// Lower-case hex.
    sha256: String,
}

impl Image {
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Lower-case hex SHA-256 of the image when it was opened.
    pub fn sha256(&self) -> &str {
        &self.sha256
    }

    fn hash(&self) -> Result<String> {
        let mut reader = ImageReader { image: self.clone(), offset: 0, hasher: Sha256::new(), verify: false };
        while reader.next_chunk()?.is_some() {}
        Ok(hex(&reader.hasher.finalize()))
    }

    /// A reader for one upload: the image's bytes in chunks, checked
    /// against the size and hash taken when it was opened.
    pub fn reader(&self) -> ImageReader {
        ImageReader { image: self.clone(), offset: 0, hasher: Sha256::new(), verify: true }
    }
}

/// Reads an [`Image`] in chunks of at most [`CHUNK`] bytes (blocking:
/// call it from the blocking pool), hashing as it goes.
#[derive(Debug)]
pub struct ImageReader {
    image: Image,
    offset: u64,
    hasher: Sha256,
    /// Compare the bytes read with the size and hash taken at open.
    verify: bool,
}

impl ImageReader {
    /// The next chunk, `None` after the last. An error when the file
    /// changed since it was opened: it ended early, or its bytes hash
    /// differently (found before the last chunk is handed out, so an upload
    /// ends incomplete).
    pub fn next_chunk(&mut self) -> Result<Option<Vec<u8>>> {
        let len = self.image.len;
        if self.offset >= len {
            return Ok(None);
        }
        let want = CHUNK.min((len - self.offset) as usize);
        let mut buf = vec![0u8; want];
        let mut got = 0;
        while got < want {
            let n = self
                .image
                .file
                .read_at(&mut buf[got..], self.offset + got as u64)
                .map_err(|e| self.changed(format!("reading it failed: {e}")))?;
            if n == 0 {
                return Err(self.changed(format!("it ended after {} of {len} bytes", self.offset + got as u64)));
            }
            got += n;
        }
        self.offset += want as u64;
        self.hasher.update(&buf);
        if self.verify && self.offset == len {
            let now = hex(&self.hasher.clone().finalize());
            if now != self.image.sha256 {
                return Err(self.changed(format!("its SHA-256 is now {now}, not {}", self.image.sha256)));
            }
            // Nothing more than the checked length: a file that grew is cut at it.
            let mut one = [0u8; 1];
            if matches!(self.image.file.read_at(&mut one, len), Ok(1)) {
                tracing::warn!(image = %self.image.name, "The firmware image grew while it was sent; only the checked bytes were sent.");
            }
        }
        Ok(Some(buf))
    }

    fn changed(&self, why: String) -> ProviderError {
        ProviderError::new(
            ErrorCode::FirmwareImageInvalid,
            format!(
                "the firmware image {} changed while it was sent ({why}); the upload was cut short",
                self.image.name
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Dir(PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn dir() -> Dir {
        let d = std::env::temp_dir().join(format!(
            "bmcfleet-images-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("images")).unwrap();
        Dir(d)
    }

    fn sha(data: &[u8]) -> String {
        hex(&Sha256::digest(data))
    }

    #[tokio::test]
    async fn only_regular_files_inside_the_directory_bounded_and_hashed() {
        let d = dir();
        let images = d.0.join("images");
        let data: Vec<u8> = (0..(CHUNK * 2 + 17)).map(|i| (i * 7 % 251) as u8).collect();
        std::fs::write(images.join("bios.bin"), &data).unwrap();
        std::fs::write(d.0.join("secret"), b"outside").unwrap();
        std::os::unix::fs::symlink(images.join("bios.bin"), images.join("latest.bin")).unwrap();
        std::os::unix::fs::symlink(d.0.join("secret"), images.join("out.bin")).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", images.join("passwd.bin")).unwrap();
        std::fs::create_dir(images.join("sub")).unwrap();
        std::fs::write(images.join("empty.bin"), b"").unwrap();
        let fifo = images.join("fifo.bin");
        assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let dir = ImageDir::new(&images, data.len() as u64).unwrap();

        let image = dir.open("bios.bin", Some(&sha(&data).to_uppercase())).await.unwrap();
        assert_eq!((image.len(), image.sha256()), (data.len() as u64, sha(&data).as_str()));
        let mut r = image.reader();
        let mut read = Vec::new();
        while let Some(c) = r.next_chunk().unwrap() {
            assert!(c.len() <= CHUNK);
            read.extend(c);
        }
        assert_eq!(read, data);
        assert_eq!(dir.open("latest.bin", None).await.unwrap().sha256(), sha(&data), "a link inside the directory");

        for (name, says) in [
            ("missing.bin", "no firmware image"),
            ("out.bin", "leading out"),
            ("passwd.bin", "leading out"),
            ("sub", "not a regular file"),
            ("fifo.bin", "not a regular file"),
            ("empty.bin", "empty"),
            ("../secret", "plain file name"),
        ] {
            let e = dir.open(name, None).await.unwrap_err();
            assert_eq!((e.code, e.not_sent), (ErrorCode::FirmwareImageInvalid, true), "{name}: {e}");
            assert!(e.message.contains(says), "{name}: {e}");
        }
        let e = dir.open("bios.bin", Some(&"0".repeat(64))).await.unwrap_err();
        assert!(e.message.contains("not the 0000"), "{e}");
        let small = ImageDir::new(&images, data.len() as u64 - 1).unwrap();
        assert!(small.open("bios.bin", None).await.unwrap_err().message.contains("--firmware-image-max-bytes"));
        let file = ImageDir::new(&images.join("bios.bin"), 1).unwrap_err();
        assert!(file.to_string().ends_with("bios.bin is not a directory"), "{file}");
        assert_eq!(file.kind(), DirErrorKind::NotADirectory);
        let missing = ImageDir::new(&images.join("nope"), 1).unwrap_err();
        assert_eq!(missing.kind(), DirErrorKind::Unreadable);
        let io = std::error::Error::source(&missing).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(io.map(std::io::Error::kind), Some(std::io::ErrorKind::NotFound), "the I/O error is kept");
    }

    #[tokio::test]
    async fn a_file_changed_after_its_check_ends_the_upload_before_its_last_chunk() {
        let d = dir();
        let images = d.0.join("images");
        let data = vec![1u8; CHUNK + 10];
        std::fs::write(images.join("x.bin"), &data).unwrap();
        let dir = ImageDir::new(&images, 1 << 30).unwrap();
        let image = dir.open("x.bin", None).await.unwrap();
        let mut changed = data.clone();
        changed[CHUNK + 5] = 2;
        std::fs::write(images.join("x.bin"), &changed).unwrap();
        let mut r = image.reader();
        assert!(r.next_chunk().unwrap().is_some(), "the first chunk is unchanged");
        let e = r.next_chunk().unwrap_err();
        assert!(e.code == ErrorCode::FirmwareImageInvalid && e.message.contains("changed while it was sent"), "{e}");
        std::fs::write(images.join("x.bin"), &data[..CHUNK]).unwrap();
        let mut r = image.reader();
        r.next_chunk().unwrap();
        assert!(r.next_chunk().unwrap_err().message.contains("ended after"));
    }
}
